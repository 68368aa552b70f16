package dtype

import "testing"

func TestDTypeTable(t *testing.T) {
	tests := []struct {
		d     DType
		val   uint8
		size  int
		name  string
		float bool
	}{
		{Invalid, 0, 0, "invalid", false},
		{Float32, 1, 4, "float32", true},
		{Float64, 2, 8, "float64", true},
		{BFloat16, 3, 2, "bfloat16", true},
		{Float16, 4, 2, "float16", true},
		{Int8, 5, 1, "int8", false},
		{UInt8, 6, 1, "uint8", false},
		{Int16, 7, 2, "int16", false},
		{Int32, 8, 4, "int32", false},
		{Int64, 9, 8, "int64", false},
		{Bool, 10, 1, "bool", false},
		{Float8E4M3FN, 11, 1, "float8_e4m3fn", true},
		{Float8E5M2, 12, 1, "float8_e5m2", true},
	}
	for _, tc := range tests {
		if uint8(tc.d) != tc.val {
			t.Errorf("%s = %d, want %d (C ABI)", tc.name, uint8(tc.d), tc.val)
		}
		if got := tc.d.Size(); got != tc.size {
			t.Errorf("%s.Size() = %d, want %d", tc.name, got, tc.size)
		}
		if got := tc.d.String(); got != tc.name {
			t.Errorf("DType(%d).String() = %q, want %q", tc.val, got, tc.name)
		}
		if got := tc.d.IsFloat(); got != tc.float {
			t.Errorf("%s.IsFloat() = %v, want %v", tc.name, got, tc.float)
		}
		if got, want := tc.d.Valid(), tc.d != Invalid; got != want {
			t.Errorf("%s.Valid() = %v, want %v", tc.name, got, want)
		}
	}
	for _, d := range []DType{13, 42, 255} {
		if d.Valid() || d.Size() != 0 || d.IsFloat() {
			t.Errorf("DType(%d): Valid=%v Size=%d IsFloat=%v, want false 0 false", d, d.Valid(), d.Size(), d.IsFloat())
		}
	}
	if got := DType(42).String(); got != "DType(42)" {
		t.Errorf("DType(42).String() = %q", got)
	}
}
