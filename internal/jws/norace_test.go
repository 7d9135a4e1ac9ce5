//go:build !race

package jws

const raceEnabled = false
