package handoff

// ReadsWarm reports whether Receive would leave b's chain text unread,
// taking its elements from the cache (Receiver.warm), for the external
// tests. It counts the cache's hits as a Receive would.
func (r *Receiver) ReadsWarm(b []byte) bool {
	h, w := r.warm(b)
	return h != nil && w != nil
}
