package consensus

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// fullRequest sets every optional block, so every field of Request holds a
// value a walk can reach.
func fullRequest(t *testing.T) *Request {
	r := mustRequest(t, `{"requestId":"r","task":"T é","participants":[{"id":"a","role":"critic"},{"id":"b"}],
	 "sessionPolicy":{"sessionKeyPrefix":"k"},"reportPolicy":{"representativeId":"a"},
	 "actionPolicy":{"prompt":"act","actorId":"a"},"promptPolicy":{"debateTemplate":"d","reportTemplate":"r"},
	 "waitingPolicy":{"globalDeadlineMs":9000},"constraints":{"language":"en","tokenBudgetHint":5}}`)
	r.Context = nil
	return r
}

// walk calls fn for every string, float, pointer and slice reachable from v.
func walk(v reflect.Value, path string, fn func(path string, v reflect.Value)) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			walk(v.Field(i), path+"."+v.Type().Field(i).Name, fn)
		}
	case reflect.Pointer:
		fn(path, v)
		if !v.IsNil() {
			walk(v.Elem(), path, fn)
		}
	case reflect.Slice:
		fn(path, v)
		if v.Type().Elem().Kind() != reflect.Uint8 {
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i), path+"[]", fn)
			}
		}
	case reflect.String, reflect.Float64:
		fn(path, v)
	}
}

func TestCopyRequest_CoversEveryField(t *testing.T) {
	r := fullRequest(t)
	c, ok := copyRequest(r)
	if !ok {
		t.Fatal("copyRequest refused a plain request")
	}
	want, err := cloneRequestJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("copy differs from the JSON round trip:\n%+v\n%+v", c, want)
	}
	// No pointer or slice of the copy may alias the original.
	var orig []uintptr
	walk(reflect.ValueOf(r).Elem(), "", func(_ string, v reflect.Value) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice) && !v.IsNil() {
			orig = append(orig, v.Pointer())
		}
	})
	walk(reflect.ValueOf(c).Elem(), "", func(path string, v reflect.Value) {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Slice) && !v.IsNil() {
			for _, p := range orig {
				if p == v.Pointer() {
					t.Errorf("%s aliases the original", path)
				}
			}
		}
	})
	// Every string and float is checked: a value JSON would change or refuse
	// makes copyRequest fall back to the round trip.
	var paths []string
	walk(reflect.ValueOf(r).Elem(), "", func(path string, v reflect.Value) {
		if v.Kind() == reflect.String || v.Kind() == reflect.Float64 {
			paths = append(paths, path)
		}
	})
	for i, path := range paths {
		bad := fullRequest(t)
		n := 0
		walk(reflect.ValueOf(bad).Elem(), "", func(_ string, v reflect.Value) {
			switch v.Kind() {
			case reflect.String:
				if n == i {
					v.SetString(v.String() + "\xff")
				}
				n++
			case reflect.Float64:
				if n == i {
					v.SetFloat(math.NaN())
				}
				n++
			}
		})
		if _, ok := copyRequest(bad); ok {
			t.Errorf("%s: copyRequest accepted a value the JSON round trip changes", path)
		}
	}
	if len(paths) < 25 {
		t.Fatalf("walk found only %d fields", len(paths))
	}
	withContext := fullRequest(t)
	withContext.Context = json.RawMessage(`{ "a" : "<" }`)
	if _, ok := copyRequest(withContext); ok {
		t.Error("copyRequest accepted a context")
	}
	got, err := cloneRequest(withContext)
	if err != nil || string(got.Context) != `{"a":"\u003c"}` {
		t.Errorf("context not canonicalised by the round trip: %s %v", got.Context, err)
	}
}
