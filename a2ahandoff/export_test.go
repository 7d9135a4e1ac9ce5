package a2ahandoff

// RerunJoined is how many Cancel Task requests x's handler ran again
// because a2a-go answered them with another request's result.
func RerunJoined(x *Executor) int64 { return x.rerunJoined.Load() }
