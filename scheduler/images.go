package scheduler

import "github.com/gantryhq/gantry/pool"

// CanRun reports whether the pool with the id can run the image, asking the pool when it
// implements ImageChecker; an unknown pool, or one that cannot tell, answers ok. It is a
// core.ImageRunner, for the catalog's endpoint rules.
func (p *Placer) CanRun(poolID, image string) (ok bool, why string) {
	s, found := p.slots[poolID]
	if !found {
		return true, ""
	}
	if c, is := s.pool.(pool.ImageChecker); is {
		return c.CanRun(image)
	}
	return true, ""
}
