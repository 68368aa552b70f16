//go:build !purego

#include "textflag.h"

// func pause()
TEXT ·pause(SB), NOSPLIT, $0-0
	MOVL $30, AX
again:
	PAUSE
	DECL AX
	JNZ  again
	RET
