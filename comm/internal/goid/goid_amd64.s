#include "textflag.h"

// func Key() uintptr
TEXT ·Key(SB), NOSPLIT, $0-8
	MOVQ (TLS), AX
	MOVQ AX, ret+0(FP)
	RET
