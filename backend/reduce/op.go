// Package reduce implements the elementwise reductions used by zipccl's
// collectives (the combine step of ring all-reduce, reduce-scatter, ...), with
// results that match PyTorch's CPU tensor arithmetic bit for bit.
//
// Buffers are little-endian arrays of a dtype.DType. Float32 and Float64 use
// native IEEE arithmetic. BFloat16, Float16 and the float8 formats are
// widened to float32, combined in float32 and rounded back with package
// dtype's conversions, as torch does for a+b and a*b on those types. Integers
// wrap (two's complement). Bool follows ProcessGroupNCCL: SUM and MAX are
// logical OR, PRODUCT and MIN logical AND; results are always 0 or 1.
//
// NaNs. MIN and MAX return a NaN operand's bits unchanged, the first
// operand's if both are NaN, and treat -0 as smaller than +0. For SUM and
// PRODUCT on the reduced-precision types the NaN that is rounded is chosen
// by x86's rule on every architecture: the first operand's if it is NaN,
// else the second's, made quiet; ∞-∞ and 0×∞ give the negative default NaN.
// Rounding then keeps its sign (and, for float16, the top payload bits),
// except that bfloat16 NaN is always 0x7FC0 (see dtype.F32ToBF16). Float32
// and float64 NaN bits are the host FPU's, which on amd64 is the same rule.
// torch's own kernels agree except that which NaN wins when both operands
// are NaN depends on how the C++ compiler ordered the operands.
//
// On amd64 the hot kernels have AVX2 and AVX-512 versions selected at run
// time; they produce the same bits as the portable Go code, which the
// "purego" build tag forces.
package reduce

import (
	"errors"
	"strconv"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Op is a reduction operator. The numeric values are part of the C ABI and
// must never change.
type Op uint8

// Reduction operators. Values are fixed by the C ABI.
const (
	Sum       Op = 0 // addition
	Avg       Op = 1 // Sum, then Average by the number of contributions
	Product   Op = 2 // multiplication (wrapping for integers)
	Min       Op = 3 // minimum; NaN-propagating for floats
	Max       Op = 4 // maximum; NaN-propagating for floats
	BAnd      Op = 5 // bitwise AND (integers and bool only)
	BOr       Op = 6 // bitwise OR (integers and bool only)
	BXor      Op = 7 // bitwise XOR (integers and bool only)
	PreMulSum Op = 8 // Scale each contribution, then Sum (floats only)
)

const numOps = 9

var opNames = [numOps]string{"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"}

// String returns the operator's name as torch.distributed.ReduceOp spells it
// ("SUM", "PREMUL_SUM", ...), or "Op(N)" for undefined values.
func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// ErrUnsupported is wrapped by every error Check returns; test for it with
// errors.Is.
var ErrUnsupported = errors.New("zipccl: unsupported reduction")

// UnsupportedError reports a reduction operator that is undefined or not
// defined for a dtype. It wraps ErrUnsupported.
type UnsupportedError struct {
	Op    Op
	DType dtype.DType
}

// Error returns a message such as
// "zipccl: reduce op BAND is not supported for float32".
func (e *UnsupportedError) Error() string {
	return "zipccl: reduce op " + e.Op.String() + " is not supported for " + e.DType.String()
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// Check reports whether op is defined for dt, returning nil if it is and an
// *UnsupportedError (which wraps ErrUnsupported) if not:
//
//   - floating-point types: SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM;
//   - integer types: all but PREMUL_SUM (AVG divides, truncating);
//   - bool: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR.
func Check(dt dtype.DType, op Op) error {
	if supported(dt, op) {
		return nil
	}
	return &UnsupportedError{Op: op, DType: dt}
}

func supported(dt dtype.DType, op Op) bool {
	if !dt.Valid() || op >= numOps {
		return false
	}
	switch {
	case dt.IsFloat():
		return op != BAnd && op != BOr && op != BXor
	case dt == dtype.Bool:
		return op != Avg && op != PreMulSum
	default: // integers
		return op != PreMulSum
	}
}
