package rpc

import "testing"

// BenchmarkGrowStack: a fresh goroutine that goes 14 KiB deep (about what
// a follower's map/connect needs below net/http, growstack.go), with and
// without growStack at its top. Without it the stack doubles from 2 KiB
// four times, the last copies walking every frame.
func BenchmarkGrowStack(b *testing.B) {
	for _, bc := range []struct {
		name string
		grow bool
	}{{"as needed", false}, {"grown first", true}} {
		b.Run(bc.name, func(b *testing.B) {
			done := make(chan int)
			for b.Loop() {
				go func() {
					if bc.grow {
						growStack()
					}
					done <- deepStack(14)
				}()
				<-done
			}
		})
	}
}
