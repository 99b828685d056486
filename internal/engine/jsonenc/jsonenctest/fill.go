// Package jsonenctest fills values for the tests of hand-written JSON
// encoders: every exported field, recursively, set or left zero at random,
// so a field an encoder forgets (one added to its type later) shows as a
// difference from encoding/json.
package jsonenctest

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"time"
)

var (
	rawType  = reflect.TypeFor[json.RawMessage]()
	timeType = reflect.TypeFor[time.Time]()
	strs     = []string{"a", "run-1", `q"<&>`, "é\u2028\n", "bad\xff"}
	raws     = []string{`1`, `{"k":[1,"<x>"]}`, ` { "s" : true } `, `"a&b"`}
)

// Fill sets the exported fields of the struct ptr points to, recursively:
// each to a value from r, or (when zeros) left zero one time in three.
func Fill(r *rand.Rand, ptr any, zeros bool) {
	fill(r, reflect.ValueOf(ptr).Elem(), zeros, 0)
}

func fill(r *rand.Rand, v reflect.Value, zeros bool, depth int) {
	if zeros && r.IntN(3) == 0 {
		return
	}
	switch {
	case v.Type() == rawType:
		v.SetBytes([]byte(raws[r.IntN(len(raws))]))
		return
	case v.Type() == timeType:
		zone := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 3600*r.IntN(12))}[r.IntN(3)]
		v.Set(reflect.ValueOf(time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(zone)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(strs[r.IntN(len(strs))])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(r.Int64N(1e6) - 1e3)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		v.SetUint(r.Uint64N(1e6) + 1)
	case reflect.Float64, reflect.Float32:
		v.SetFloat(r.Float64())
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(r, p.Elem(), false, depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(r, v.Field(i), zeros, depth+1)
			}
		}
	case reflect.Slice:
		if depth > 4 {
			return
		}
		s := reflect.MakeSlice(v.Type(), 1+r.IntN(2), 2)
		for i := range s.Len() {
			fill(r, s.Index(i), false, depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if depth > 4 {
			return
		}
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(r, k, false, depth+1)
		fill(r, e, false, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}
