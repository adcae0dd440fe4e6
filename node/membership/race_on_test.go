//go:build race

package membership

// raceEnabled is true when the race detector is compiled in: it slows the
// gossip goroutines 5-10x, so timing figures would measure the detector.
const raceEnabled = true
