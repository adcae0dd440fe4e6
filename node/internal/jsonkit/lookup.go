package jsonkit

// Lookup finds the raw values of a few top-level members of the JSON
// object obj in one walk: vals[i] is set to the value of keys[i] (the last
// one when a key repeats) or left nil when obj has no such member. It
// reports whether obj could be walked. Keys are compared in place (keyIs),
// so a lookup allocates nothing unless a key holds an escape; it spells
// out the object loop for the reason given at the top of scan.go.
func Lookup(obj []byte, keys []string, vals [][]byte) bool {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	if i = skipWS(obj, i+1); i < len(obj) && obj[i] == '}' {
		return true
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return false
		}
		end, ok := skipValue(obj, i)
		if !ok || end-i < 2 {
			return false
		}
		rawKey := obj[i:end]
		if i = skipWS(obj, end); i >= len(obj) || obj[i] != ':' {
			return false
		}
		i = skipWS(obj, i+1)
		if end, ok = skipValue(obj, i); !ok {
			return false
		}
		for k, key := range keys {
			match, ok := keyIs(rawKey, key)
			if !ok {
				return false
			}
			if match {
				vals[k] = obj[i:end]
			}
		}
		if i = skipWS(obj, end); i >= len(obj) {
			return false
		}
		switch obj[i] {
		case ',':
			i = skipWS(obj, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
}
