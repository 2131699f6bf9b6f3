package scaleout_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
