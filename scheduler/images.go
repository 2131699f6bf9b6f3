package scheduler

// ImageChecker is implemented by pools that know which images they can run (optional): the
// process pool runs only the built-in images and those its config maps to a command. CanRun
// answers false with why and the fix when the pool cannot run image; a pool that pulls
// images on demand does not implement it.
type ImageChecker interface {
	CanRun(image string) (ok bool, why string)
}

// CanRun reports whether the pool with the id can run the image, asking the pool when it
// implements ImageChecker; an unknown pool, or one that cannot tell, answers ok. It is a
// core.ImageRunner, for the catalog's endpoint rules.
func (p *Placer) CanRun(poolID, image string) (ok bool, why string) {
	s, found := p.slots[poolID]
	if !found {
		return true, ""
	}
	if c, is := s.pool.(ImageChecker); is {
		return c.CanRun(image)
	}
	return true, ""
}
