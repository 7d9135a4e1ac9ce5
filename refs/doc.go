// Package refs checks an offer's context references (draft "Context
// References" and step 7 of "Receiving an Offer"): kinds "digest",
// "salted-digest", "learnlog-head" and "scitt-receipt", each with one of
// four honest outcomes (verified, mismatch, unverifiable, not checked).
package refs
