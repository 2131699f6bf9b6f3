package core_test

import (
	"testing"

	"github.com/gantryhq/gantry/core"
)

func TestInvalidErrorText(t *testing.T) {
	t.Parallel()
	a := core.FieldError{Path: "$.image", Message: "no pool can run it"}
	b := core.FieldError{Path: "$.gpu.count", Message: "must be at least 1"}
	tests := []struct {
		fields []core.FieldError
		want   string
	}{
		{[]core.FieldError{a}, "$.image: no pool can run it"},
		{[]core.FieldError{a, b}, "the request failed validation ($.image: no pool can run it; $.gpu.count: must be at least 1)"},
	}
	for _, tt := range tests {
		if got := core.Invalid(tt.fields...).Error(); got != tt.want {
			t.Errorf("Invalid(%v).Error() = %q; want %q", tt.fields, got, tt.want)
		}
	}
}
