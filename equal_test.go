package handoff

import (
	"math"
	"reflect"
)

// DeepEqualNaN is reflect.DeepEqual with NaN equal to itself (a CBOR
// unknown member may hold one). Exported for the package's external tests.
func DeepEqualNaN(a, b any) bool { return nanEqual(reflect.ValueOf(a), reflect.ValueOf(b)) }

func nanEqual(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || (math.IsNaN(x) && math.IsNaN(y))
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return nanEqual(a.Elem(), b.Elem())
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && (a.IsNil() != b.IsNil()) && (a.Len() != 0 || b.Len() != 0) {
			return false
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !nanEqual(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				// Keys that are not comparable by value (NaN keys) fall back.
				if !mapHasEqual(b, it.Key(), it.Value()) {
					return false
				}
				continue
			}
			if !nanEqual(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				// A struct with hidden state (big.Int, time.Time): as a whole.
				return a.CanInterface() && b.CanInterface() && reflect.DeepEqual(a.Interface(), b.Interface())
			}
		}
		for i := 0; i < a.NumField(); i++ {
			if !nanEqual(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	if a.CanInterface() && b.CanInterface() {
		return reflect.DeepEqual(a.Interface(), b.Interface())
	}
	return false
}

func mapHasEqual(m, k, v reflect.Value) bool {
	it := m.MapRange()
	for it.Next() {
		if nanEqual(it.Key(), k) && nanEqual(it.Value(), v) {
			return true
		}
	}
	return false
}
