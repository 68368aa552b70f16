package main

// The codec's C ABI (zc_codec_*): compress one tensor into the tensor
// container of docs/FORMAT.md section 7 and back, estimate ratios, and run
// the codec benchmark. No communicator is involved. Tensor memory and output
// buffers are the caller's; Go only reads and writes them during the call
// and keeps no pointer to them afterwards.

/*
#cgo CFLAGS: -I${SRCDIR}
#include <stdlib.h>
// Angle brackets: cgo compiles its probes from files in $TMPDIR, where a
// quoted include would find a stray zipccl_abi.h before this directory's.
#include <zipccl_abi.h>
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/codec/codecbench"
	"github.com/zipccl/zipccl/backend/dtype"
)

const (
	codecMaxDims     = C.ZC_CODEC_MAX_DIMS
	codecMaxBenchIn  = 1 << 16 // bytes of bench options JSON accepted
	codecMaxKinds    = 8       // bench kinds per run
	codecMaxRounds   = 1000
	codecMaxMinTimeM = 60_000 // bench round time limit, ms
)

// cBytes views n bytes of C memory at p as a Go slice (no copy). A nil
// pointer or n == 0 gives an empty slice; a nil pointer with n > 0 is an
// error.
func cBytes(p unsafe.Pointer, n C.int64_t, what string) ([]byte, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("zipccl: codec: %s length %d is negative", what, int64(n))
	case n == 0:
		return []byte{}, nil
	case p == nil:
		return nil, fmt.Errorf("zipccl: codec: %s is NULL with length %d", what, int64(n))
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

// codecDType maps an ABI dtype code; every invalid code is an error.
func codecDType(v C.int32_t) (dtype.DType, error) {
	dt := dtypeOf(v)
	if !dt.Valid() {
		return dt, fmt.Errorf("%w: dtype code %d", codec.ErrDType, int32(v))
	}
	return dt, nil
}

// codecKind maps an ABI kind code (raw, zip3, huff, huff2, huff2p or auto).
func codecKind(v C.int32_t) (codec.Kind, error) {
	switch v {
	case C.ZC_CODEC_RAW:
		return codec.Raw, nil
	case C.ZC_CODEC_ZIP3:
		return codec.Zip3, nil
	case C.ZC_CODEC_HUFF:
		return codec.Huff, nil
	case C.ZC_CODEC_HUFF2:
		return codec.Huff2, nil
	case C.ZC_CODEC_HUFF2P:
		return codec.Huff2Packed, nil
	case C.ZC_CODEC_AUTO:
		return codec.Auto, nil
	}
	return 0, fmt.Errorf("%w: kind code %d (want 0 raw, 1 zip3, 2 huff, 3 huff2, 4 huff2p or 255 auto)", codec.ErrKind, int32(v))
}

// codecShape copies ndim dimensions from C and checks them; it returns the
// shape and the element count.
func codecShape(shape *C.int64_t, ndim C.int32_t) ([]int64, int, error) {
	if ndim < 0 || ndim > codecMaxDims {
		return nil, 0, fmt.Errorf("%w: %d dimensions (max %d)", codec.ErrSize, int32(ndim), codecMaxDims)
	}
	if ndim > 0 && shape == nil {
		return nil, 0, fmt.Errorf("%w: shape is NULL with %d dimensions", codec.ErrSize, int32(ndim))
	}
	out := make([]int64, int(ndim))
	numel := int64(1)
	const limit = int64(1) << 56
	if ndim > 0 {
		for i, d := range unsafe.Slice((*int64)(unsafe.Pointer(shape)), int(ndim)) {
			if d < 0 {
				return nil, 0, fmt.Errorf("%w: dimension %d is %d", codec.ErrSize, i, d)
			}
			out[i] = d
			if numel != 0 && d > limit/numel {
				return nil, 0, fmt.Errorf("%w: shape %v has more than 2^56 elements", codec.ErrSize, out[:i+1])
			}
			numel *= d
		}
	}
	return out, int(numel), nil
}

// containerHeaderLen is the tensor container's header length for ndim
// dimensions (docs/FORMAT.md section 7).
func containerHeaderLen(ndim int) int { return 8 + 8*ndim + 4 }

// encodeBound is the capacity that lets Encode work in place: it covers the
// final frame (never longer than the raw frame) and the scratch room the
// encoder reserves while coding, for the requested kind.
func encodeBound(numel int, dt dtype.DType, k codec.Kind) int {
	nbytes := numel * dt.Size()
	bound := codec.MaxEncodedLen(nbytes, dt)
	kinds := []codec.Kind{codec.EffectiveKind(dt, k)}
	if kinds[0] == codec.Auto {
		kinds = []codec.Kind{codec.Zip3, codec.Huff}
	}
	for _, kk := range kinds {
		work := codec.HeaderLen + codec.StaticLen(numel, dt, kk) + codec.Align
		switch kk {
		case codec.Huff:
			work += numel + 3<<16
		case codec.Huff2, codec.Huff2Packed: // up to 4 planes raw per 65536-element block
			work += nbytes + 4*(numel>>16+1) + 3<<16
		case codec.Zip3:
			work += numel / 16
		}
		bound = max(bound, work)
	}
	return bound
}

//export zc_codec_max_len
func zc_codec_max_len(dt C.int32_t, shape *C.int64_t, ndim C.int32_t, kind C.int32_t) (n C.int64_t) {
	var code C.int32_t
	defer func() {
		if code != 0 {
			n = -1
		}
	}()
	defer guard(&code, nil, 0) // recover() must be called by the deferred function itself
	d, err := codecDType(dt)
	if err != nil {
		return -1
	}
	k, err := codecKind(kind)
	if err != nil {
		return -1
	}
	_, numel, err := codecShape(shape, ndim)
	if err != nil {
		return -1
	}
	return C.int64_t(containerHeaderLen(int(ndim)) + encodeBound(numel, d, k))
}

//export zc_codec_encode_tensor
func zc_codec_encode_tensor(src unsafe.Pointer, nbytes C.int64_t, dt C.int32_t, shape *C.int64_t, ndim C.int32_t,
	kind C.int32_t, threads C.int32_t, dst unsafe.Pointer, capacity C.int64_t, outLen *C.int64_t, usedKind *C.int32_t,
	errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	fail := func(err error) C.int32_t {
		writeErr(errBuf, errLen, err.Error())
		return C.ZC_ERR_INVALID
	}
	if outLen != nil {
		*outLen = 0
	}
	d, err := codecDType(dt)
	if err != nil {
		return fail(err)
	}
	k, err := codecKind(kind)
	if err != nil {
		return fail(err)
	}
	dims, numel, err := codecShape(shape, ndim)
	if err != nil {
		return fail(err)
	}
	in, err := cBytes(src, nbytes, "source")
	if err != nil {
		return fail(err)
	}
	if numel*d.Size() != len(in) {
		return fail(fmt.Errorf("%w: shape %v of %v needs %d bytes, have %d", codec.ErrSize, dims, d, numel*d.Size(), len(in)))
	}
	out, err := cBytes(dst, capacity, "destination")
	if err != nil {
		return fail(err)
	}
	// Encode appends to out[:0]: in place while the capacity lasts; if the
	// encoder needs more room it moves to Go memory, and the result is
	// copied back below when it fits.
	res, used, err := codec.EncodeTensorThreads(out[:0], in, d, dims, k, int(threads))
	if err != nil {
		return fail(err)
	}
	if len(res) > len(out) {
		if outLen != nil {
			*outLen = C.int64_t(len(res))
		}
		return fail(fmt.Errorf("%w: the container needs %d bytes, the buffer holds %d", codec.ErrSize, len(res), len(out)))
	}
	if len(res) > 0 && (len(out) == 0 || unsafe.SliceData(res) != unsafe.SliceData(out)) {
		copy(out, res)
	}
	if outLen != nil {
		*outLen = C.int64_t(len(res))
	}
	if usedKind != nil {
		*usedKind = C.int32_t(used)
	}
	return C.ZC_OK
}

// parseContainer checks the container header and its frame header, and that
// src is exactly one container long.
func parseContainer(src []byte) (dtype.DType, []int64, codec.Header, error) {
	dt, shape, _, err := codec.DecodeTensorHeader(src)
	if err != nil {
		return 0, nil, codec.Header{}, err
	}
	off := containerHeaderLen(len(shape))
	h, err := codec.PeekHeader(src[off:])
	if err != nil {
		return 0, nil, h, err
	}
	if have := len(src) - off; have < h.FrameLen {
		return 0, nil, h, fmt.Errorf("%w: container has %d frame bytes, the frame needs %d", codec.ErrTruncated, have, h.FrameLen)
	} else if have > h.FrameLen {
		return 0, nil, h, fmt.Errorf("%w: %d bytes after the frame", codec.ErrCorrupt, have-h.FrameLen)
	}
	return dt, shape, h, nil
}

//export zc_codec_decode_header
func zc_codec_decode_header(src unsafe.Pointer, n C.int64_t, out *C.zc_codec_header, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	fail := func(err error) C.int32_t {
		writeErr(errBuf, errLen, err.Error())
		return C.ZC_ERR_INVALID
	}
	if out == nil {
		return fail(errors.New("zipccl: codec: NULL header output"))
	}
	*out = C.zc_codec_header{}
	in, err := cBytes(src, n, "source")
	if err != nil {
		return fail(err)
	}
	dt, shape, h, err := parseContainer(in)
	if err != nil {
		return fail(err)
	}
	out.dtype = C.int32_t(dt)
	out.kind = C.int32_t(h.Kind)
	out.ndim = C.int32_t(len(shape))
	out.numel = C.int64_t(h.Numel)
	out.raw_len = C.int64_t(h.RawLen)
	out.total_len = C.int64_t(len(in))
	for i, d := range shape {
		out.shape[i] = C.int64_t(d)
	}
	return C.ZC_OK
}

//export zc_codec_decode_tensor
func zc_codec_decode_tensor(src unsafe.Pointer, n C.int64_t, dst unsafe.Pointer, dstLen C.int64_t, threads C.int32_t, errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	fail := func(err error) C.int32_t {
		writeErr(errBuf, errLen, err.Error())
		return C.ZC_ERR_INVALID
	}
	in, err := cBytes(src, n, "source")
	if err != nil {
		return fail(err)
	}
	out, err := cBytes(dst, dstLen, "destination")
	if err != nil {
		return fail(err)
	}
	_, _, h, err := parseContainer(in)
	if err != nil {
		return fail(err)
	}
	if h.RawLen != len(out) {
		return fail(fmt.Errorf("%w: destination is %d bytes, the tensor has %d", codec.ErrSize, len(out), h.RawLen))
	}
	if err := codec.DecodeTensorThreads(out, in, int(threads)); err != nil {
		return fail(err)
	}
	return C.ZC_OK
}

// codecElements is the dtype and the source bytes of a call over whole
// elements (estimate, bench).
func codecElements(dt C.int32_t, src unsafe.Pointer, nbytes C.int64_t) (dtype.DType, []byte, error) {
	d, err := codecDType(dt)
	if err != nil {
		return d, nil, err
	}
	in, err := cBytes(src, nbytes, "source")
	if err != nil {
		return d, nil, err
	}
	if len(in)%d.Size() != 0 {
		return d, nil, fmt.Errorf("%w: %d bytes is not a whole number of %v elements", codec.ErrSize, len(in), d)
	}
	return d, in, nil
}

//export zc_codec_estimate
func zc_codec_estimate(src unsafe.Pointer, nbytes C.int64_t, dt C.int32_t, kind C.int32_t, ratio *C.double, chosen *C.int32_t,
	errBuf *C.char, errLen C.int32_t) (code C.int32_t) {
	defer guard(&code, errBuf, errLen)
	fail := func(err error) C.int32_t {
		writeErr(errBuf, errLen, err.Error())
		return C.ZC_ERR_INVALID
	}
	d, in, err := codecElements(dt, src, nbytes)
	if err != nil {
		return fail(err)
	}
	k, err := codecKind(kind)
	if err != nil {
		return fail(err)
	}
	k = codec.EffectiveKind(d, k)
	if k == codec.Auto {
		k = codec.ChooseKind(in, d)
	}
	if ratio != nil {
		*ratio = C.double(codec.EstimateRatio(in, d, k))
	}
	if chosen != nil {
		*chosen = C.int32_t(k)
	}
	return C.ZC_OK
}

// benchOptions is the JSON accepted by zc_codec_bench.
type benchOptions struct {
	Kinds        []string `json:"kinds"`
	Rounds       int      `json:"rounds"`
	MinTimeMs    float64  `json:"min_time_ms"`
	SkipExternal bool     `json:"skip_external"`
}

func parseBenchOptions(js []byte) (codecbench.Options, error) {
	var o codecbench.Options
	var b benchOptions
	if len(js) > 0 {
		if len(js) > codecMaxBenchIn {
			return o, fmt.Errorf("zipccl: codec bench: options are %d bytes (max %d)", len(js), codecMaxBenchIn)
		}
		if err := json.Unmarshal(js, &b); err != nil {
			return o, fmt.Errorf("zipccl: codec bench: options: %w", err)
		}
	}
	if len(b.Kinds) > codecMaxKinds {
		return o, fmt.Errorf("zipccl: codec bench: %d kinds (max %d)", len(b.Kinds), codecMaxKinds)
	}
	for _, s := range b.Kinds {
		k, err := codec.ParseKind(s)
		if err != nil {
			return o, err
		}
		o.Kinds = append(o.Kinds, k)
	}
	if b.Rounds < 0 || b.Rounds > codecMaxRounds {
		return o, fmt.Errorf("zipccl: codec bench: rounds %d (want 0..%d; 0 = default)", b.Rounds, codecMaxRounds)
	}
	if !(b.MinTimeMs >= 0 && b.MinTimeMs <= codecMaxMinTimeM) {
		return o, fmt.Errorf("zipccl: codec bench: min_time_ms %v (want 0..%d; 0 = default)", b.MinTimeMs, codecMaxMinTimeM)
	}
	o.Rounds = b.Rounds
	o.MinTime = time.Duration(b.MinTimeMs * float64(time.Millisecond))
	o.SkipExternal = b.SkipExternal
	return o, nil
}

//export zc_codec_bench
func zc_codec_bench(src unsafe.Pointer, nbytes C.int64_t, dt C.int32_t, optionsJSON *C.char, out *C.char, capacity C.int64_t,
	errBuf *C.char, errLen C.int32_t) (n C.int64_t) {
	var code C.int32_t
	defer func() {
		if code != 0 {
			n = -1
		}
	}()
	defer guard(&code, errBuf, errLen)
	fail := func(err error) C.int64_t {
		writeErr(errBuf, errLen, err.Error())
		return -1
	}
	d, in, err := codecElements(dt, src, nbytes)
	if err != nil {
		return fail(err)
	}
	var js []byte
	if optionsJSON != nil {
		js = []byte(C.GoString(optionsJSON))
	}
	opts, err := parseBenchOptions(js)
	if err != nil {
		return fail(err)
	}
	rows, err := json.Marshal(codecbench.Run(in, d, opts))
	if err != nil {
		return fail(err)
	}
	if out != nil && int64(capacity) > int64(len(rows)) {
		b := unsafe.Slice((*byte)(unsafe.Pointer(out)), len(rows)+1)
		copy(b, rows)
		b[len(rows)] = 0
	}
	return C.int64_t(len(rows))
}
