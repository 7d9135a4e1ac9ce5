package handoff

// ReadsWarm reports whether Receive would leave b's chain text unread,
// taking its elements from the cache (Receiver.warm), for the external
// tests. Like warm, it counts nothing and marks no entry.
func (r *Receiver) ReadsWarm(b []byte) bool {
	h, w := r.warm(b)
	return h != nil && w != nil && w.found != nil
}
