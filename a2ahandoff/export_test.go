package a2ahandoff

// RerunUnseen is how many Cancel Task requests x's handler ran again
// because a2a-go answered them without running the Executor.
func RerunUnseen(x *Executor) int64 { return x.rerunUnseen.Load() }

// Gates is how many tasks x's task gate notes.
func Gates(x *Executor) int { x.mu.Lock(); defer x.mu.Unlock(); return len(x.gates) }
