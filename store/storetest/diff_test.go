package storetest

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
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
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Uint8:
			f.SetBytes(append(f.Bytes(), 'x'))
		case f.Kind() == reflect.Slice:
			f.Set(reflect.Append(f, reflect.Zero(f.Type().Elem())))
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
	// A nil chain is not an empty one; in a chain, an element's octets
	// and forms are compared one by one.
	a, b = copyRecord(base), copyRecord(base)
	a.Chain, b.Chain = nil, [][]byte{}
	if d := DiffRecord(a, b); len(d) != 1 {
		t.Errorf("nil vs empty Chain: %q, want one difference", d)
	}
	a, b = NewRecord("h", store.Accepted, 2), NewRecord("h", store.Accepted, 2)
	b.Chain[1] = append(b.Chain[1], 'x')
	b.ChainForms[0] = handoff.FormInvalid
	if d := DiffRecord(a, b); len(d) != 2 || !strings.HasPrefix(d[0], "Chain[1]:") || !strings.HasPrefix(d[1], "ChainForms[0]:") {
		t.Errorf("a chain's element and a form changed: %q, want Chain[1] and ChainForms[0]", d)
	}
}
