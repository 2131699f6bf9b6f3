package core

import (
	"fmt"
	"strings"
)

// ImageRunner reports whether the pool poolID can run image. A pool that cannot tell (it
// pulls images on demand) answers ok; one that knows it cannot answers false and why, with
// the fix ("pool local (process) has no images: entry for ...; add one ...").
type ImageRunner func(poolID, image string) (ok bool, why string)

// checkImage returns the error for an image that none of pools can run: only when every
// listed pool knows it cannot, so a pool that may run it (or cannot tell) lets it through.
func (c *Catalog) checkImage(image string, pools []PoolInfo) []FieldError {
	if c.CanRun == nil || image == "" || len(pools) == 0 {
		return nil
	}
	whys := make([]string, 0, len(pools))
	for _, p := range pools {
		ok, why := c.CanRun(p.ID, image)
		if ok {
			return nil
		}
		whys = append(whys, why)
	}
	return []FieldError{{Path: "$.image", Message: fmt.Sprintf("no listed pool can run image %q: %s", image, strings.Join(whys, "; "))}}
}
