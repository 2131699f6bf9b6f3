package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLimitsConfig: the body limits of the config file, and what is refused.
func TestLimitsConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  bodyBudgetMB: 512\n  bodyTimeout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Limits, (LimitsConfig{BodyBudgetMB: 512, BodyTimeout: 5 * time.Second}); got != want {
		t.Errorf("LoadConfig limits = %+v; want %+v", got, want)
	}
	for _, tc := range []struct {
		l       LimitsConfig
		wantErr string
	}{
		{LimitsConfig{}, ""},
		{LimitsConfig{BodyBudgetMB: 64, BodyTimeout: time.Second}, ""},
		{LimitsConfig{BodyBudgetMB: 63}, "limits.bodyBudgetMB 63 must be at least 64"},
		{LimitsConfig{BodyBudgetMB: -1}, "limits.bodyBudgetMB -1 must be at least 64"},
		{LimitsConfig{BodyTimeout: time.Millisecond}, "limits.bodyTimeout 1ms must be at least 1s"},
		{LimitsConfig{BodyTimeout: -time.Second}, "limits.bodyTimeout -1s must be at least 1s"},
	} {
		err := tc.l.Validate()
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.l, err, tc.wantErr)
		}
	}
}
