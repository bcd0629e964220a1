#include "textflag.h"

// func loadAt(off uintptr) uint64
TEXT ·loadAt(SB), NOSPLIT, $0-16
	MOVD off+0(FP), R1
	ADD R1, g, R2
	MOVD (R2), R0
	MOVD R0, ret+8(FP)
	RET
