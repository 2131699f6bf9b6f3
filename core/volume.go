package core

import "time"

// This file is the network volume: storage in one data center that every worker of an
// endpoint naming it sees at /runpod-volume (issue 30).

// VolumeMountPath is where a worker sees its endpoint's network volume, as on RunPod.
const VolumeMountPath = "/runpod-volume"

// Volume bounds in GB, RunPod's.
const (
	MinVolumeGB = 10
	MaxVolumeGB = 4096
)

// Volume is a network volume. Volumes a user creates through the API belong to that user;
// those the config file declares have no owner and are read-only to the API.
type Volume struct {
	ID         string    `json:"id" yaml:"id"`
	Name       string    `json:"name" yaml:"name"`
	SizeGB     int       `json:"size" yaml:"size"`
	DataCenter string    `json:"dataCenterId" yaml:"dataCenterId"`
	Type       string    `json:"type" yaml:"type"` // STANDARD or HIGH_PERFORMANCE
	Owner      string    `json:"owner,omitempty" yaml:"-"`
	CreatedAt  time.Time `json:"createdAt" yaml:"-"`
}
