#include "textflag.h"

// func loadAt(off uintptr) uint64
TEXT ·loadAt(SB), NOSPLIT, $0-16
	MOVQ (TLS), AX
	MOVQ off+0(FP), BX
	MOVQ (AX)(BX*1), AX
	MOVQ AX, ret+8(FP)
	RET
