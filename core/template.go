package core

import "time"

// Template supplies container settings and allowedCudaVersions to endpoints created from it
// (spec 2.11). Public templates have no owner.
type Template struct {
	ID                  string `json:"id" yaml:"id"`
	Owner               string `json:"owner,omitempty" yaml:"-"`
	Name                string `json:"name" yaml:"name"`
	Container           `yaml:",inline"`
	AllowedCudaVersions []string  `json:"allowedCudaVersions,omitempty" yaml:"allowedCudaVersions"`
	StartSSH            bool      `json:"startSsh" yaml:"startSsh"`
	StartJupyter        bool      `json:"startJupyter" yaml:"startJupyter"`
	IsServerless        bool      `json:"isServerless" yaml:"isServerless"`
	IsPublic            bool      `json:"isPublic" yaml:"-"`
	CreatedAt           time.Time `json:"createdAt" yaml:"-"`
	UpdatedAt           time.Time `json:"updatedAt" yaml:"-"`
}

// TemplateDraft is a template create request as decoded; nil = omitted.
type TemplateDraft struct {
	Name                string
	Image               string
	Args                *string
	Disk                *int
	Ports               []string
	Env                 map[string]string
	Registry            *string
	AllowedCudaVersions []string
	StartSSH            bool
	StartJupyter        bool
	IsServerless        bool
}

// TemplatePatch is a partial template update; nil = unchanged.
type TemplatePatch struct {
	Name                *string
	Image               *string
	Args                *string
	Disk                *int
	Ports               []string
	Env                 map[string]string
	RegistrySet         bool
	Registry            *string
	AllowedCudaVersions []string
	StartSSH            *bool
	StartJupyter        *bool
	IsServerless        *bool
}
