package clustertest

func removeBuiltBinary() {}
