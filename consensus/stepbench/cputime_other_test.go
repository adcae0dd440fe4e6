//go:build !unix

package stepbench

func processCPU() int64 { return 0 }
