package runview

// Run returns the summary of run id as the view has it, and whether the
// view has it.
func (v *View) Run(id string) (Summary, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	s, ok := v.runs[id]
	return s, ok
}
