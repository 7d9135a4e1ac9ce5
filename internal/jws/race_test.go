//go:build race

package jws

const raceEnabled = true
