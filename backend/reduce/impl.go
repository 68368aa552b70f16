package reduce

// level is a tier of SIMD routines.
type level uint8

const (
	levelGeneric level = iota // portable Go only
	levelAVX2                 // AVX2 + F16C
	levelAVX512               // AVX-512 F/BW/VL, plus the AVX2 routines
)

var levelNames = [...]string{"generic", "avx2", "avx512"}

// maxLevel is the best tier this CPU and build can run, bestLevel the one
// used by default, and curLevel the one in use. curLevel differs from
// bestLevel only while tests compare the tiers, and must not change while
// reductions run.
var maxLevel, bestLevel = detectLevels()

var curLevel = bestLevel

// Implementation names the routines the reductions use on this machine:
// "avx512", "avx2" or "generic" (non-amd64, old CPUs, or the purego build
// tag).
func Implementation() string { return levelNames[curLevel] }
