package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gantryhq/gantry/core"
	"github.com/gantryhq/gantry/oas"
)

// This file is files: a worker stores a file its job produced (job-file), and anyone with the
// signed URL downloads it (getFile).

// WorkerJobFile implements job-file: a running job's worker stores a file it produced.
func (h *handler) WorkerJobFile(ctx context.Context, req oas.WorkerJobFileReq, p oas.WorkerJobFileParams) (oas.WorkerJobFileRes, error) {
	if err := h.worker(ctx, p.EndpointId, p.WorkerId); err != nil {
		return nil, err
	}
	if h.cfg.Files == nil {
		return nil, core.Errorf(core.KindUnavailable, "this Gantry stores no files")
	}
	owner, err := h.cfg.Jobs.HeldOwner(ctx, p.EndpointId, p.WorkerId, p.JobId)
	if err != nil {
		return nil, err
	}
	f, err := h.cfg.Files.PutFor(ctx, p.JobId, owner, string(p.Ext), req.Data)
	if err != nil {
		return nil, err
	}
	return &oas.StoredFile{Name: f.Name, URL: h.cfg.PublicURL + f.Path(), ExpiresAt: f.Expires.UTC(), Bytes: f.Size,
		ContentType: f.ContentType}, nil
}

// GetFile implements getFile: a produced file at its signed URL, with Range support.
func (h *handler) GetFile(ctx context.Context, p oas.GetFileParams, w http.ResponseWriter) error {
	if h.cfg.Files == nil {
		return core.Errorf(core.KindNotFound, "this Gantry stores no files")
	}
	rc, info, format, err := h.cfg.Files.Open(ctx, p.Name, p.Expires, p.Sig)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	w.Header().Set("Content-Type", format.ContentType)
	w.Header().Set("Cache-Control", "private, max-age="+strconv.FormatInt(max(p.Expires-h.cfg.Clock.Now().Unix(), 0), 10))
	http.ServeContent(w, requestOf(ctx), p.Name, info.Created.Truncate(time.Second), rc)
	return nil
}

// requestKey carries the raw request to handlers that write their own answer (GetFile: Range
// and conditional requests).
type requestKey struct{}

func requestOf(ctx context.Context) *http.Request {
	r, _ := ctx.Value(requestKey{}).(*http.Request)
	if r == nil {
		r, _ = http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	}
	return r
}
