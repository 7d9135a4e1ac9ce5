package storetest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// TestDiffRecordSeesEveryField: a change to any field of store.Record,
// one at a time, is a difference DiffRecord names, so a field added to
// Record cannot be missed by the suite's checks.
func TestDiffRecordSeesEveryField(t *testing.T) {
	base := NewRecord("h", store.Accepted, 0)
	base.Status = Status("s")
	n := 0
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		if v.Type() != timeType && v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
			return
		}
		n++
		got := copyRecord(base)
		f := reflect.ValueOf(got).Elem()
		for _, name := range strings.Split(path[1:], ".") {
			f = f.FieldByName(name)
		}
		switch {
		case f.Type() == timeType:
			f.Set(reflect.ValueOf(f.Interface().(time.Time).Add(time.Second)))
		case f.Kind() == reflect.Slice:
			f.SetBytes(append(f.Bytes(), 'x'))
		case f.Kind() == reflect.String:
			f.SetString(f.String() + "x")
		case f.Kind() == reflect.Bool:
			f.SetBool(!f.Bool())
		case f.CanInt():
			f.SetInt(f.Int() + 1)
		default:
			t.Fatalf("%s: a field of kind %s the test cannot change: teach it", path, f.Kind())
		}
		if d := DiffRecord(got, base); len(d) != 1 {
			t.Errorf("%s changed: DiffRecord says %q, want one difference", path, d)
		}
	}
	walk("", reflect.ValueOf(*base))
	if n < 14 {
		t.Fatalf("walked %d fields, want every field of store.Record", n)
	}
	// A nil status is not an empty one.
	a, b := copyRecord(base), copyRecord(base)
	a.Status, b.Status = nil, []byte{}
	if d := DiffRecord(a, b); len(d) != 1 {
		t.Errorf("nil vs empty Status: %q, want one difference", d)
	}
}
