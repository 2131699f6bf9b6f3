package api

import (
	"context"
	"testing"
)

// TestLiftInputKeepsNoSpareBuffer: the input lifted out of a body read into a buffer larger
// than it (a chunked body's, grown by doubling) does not keep that buffer; out of an
// exact-size buffer (a body with a Content-Length) it is a slice of it, not a copy.
func TestLiftInputKeepsNoSpareBuffer(t *testing.T) {
	t.Parallel()
	const sent = `{"input":{"s":"xxxxxxxxxxxxxxxx"},"webhook":"https://hooks.example/x"}`
	for _, tc := range []struct {
		name  string
		spare int
		slice bool // the input is a slice of the buffer
	}{
		{"exact buffer", 0, true},
		{"twice the body", len(sent), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := append(make([]byte, 0, len(sent)+tc.spare), sent...)
			small, ctx := liftInput(context.Background(), "runSyncJob", body)
			if want := `{"input":{},"webhook":"https://hooks.example/x"}`; string(small) != want {
				t.Errorf("small body = %s; want %s", small, want)
			}
			in := takeInput(ctx)
			if want := `{"s":"xxxxxxxxxxxxxxxx"}`; string(in) != want {
				t.Fatalf("input = %s; want %s", in, want)
			}
			if shared := &in[0] == &body[len(`{"input":`)]; shared != tc.slice {
				t.Errorf("input shares the body buffer = %v; want %v", shared, tc.slice)
			}
			if cap(in) != len(in) {
				t.Errorf("input cap = %d; want its length %d (no spare buffer kept)", cap(in), len(in))
			}
			if again := takeInput(ctx); again != nil {
				t.Errorf("second takeInput = %s; want nil (the context let go of it)", again)
			}
		})
	}
}
