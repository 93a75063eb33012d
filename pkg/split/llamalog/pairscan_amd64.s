#include "textflag.h"

// func pairScan(b []byte, t *pairTables) (off int, mask uint32, nl int, nlMask uint32)
TEXT ·pairScan(SB), NOSPLIT, $0-60
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), DX
	MOVQ t+24(FP), DI
	VMOVDQU 0(DI), Y8     // lo0
	VMOVDQU 32(DI), Y9    // hi0
	VMOVDQU 64(DI), Y10   // lo1
	VMOVDQU 96(DI), Y11   // hi1
	VMOVDQU 128(DI), Y12  // 0x0f
	VMOVDQU 160(DI), Y13  // '\n'
	VMOVDQU 192(DI), Y14  // lo2
	VMOVDQU 224(DI), Y15  // hi2
	XORQ AX, AX           // off
	XORQ CX, CX           // newlines in b[:off]
	SUBQ $34, DX          // the last step starts at len-34
	JL   none

loop:
	VMOVDQU (SI)(AX*1), Y0
	VMOVDQU 1(SI)(AX*1), Y1
	VPAND   Y12, Y0, Y2
	VPSRLW  $4, Y0, Y3
	VPAND   Y12, Y3, Y3
	VPSHUFB Y2, Y8, Y2
	VPSHUFB Y3, Y9, Y3
	VPAND   Y2, Y3, Y2
	VPAND   Y12, Y1, Y4
	VPSRLW  $4, Y1, Y5
	VPAND   Y12, Y5, Y5
	VPSHUFB Y4, Y10, Y4
	VPSHUFB Y5, Y11, Y5
	VPAND   Y4, Y5, Y4
	VPAND   Y2, Y4, Y2
	VPTEST  Y2, Y2
	JNZ     third

step:
	VPCMPEQB  Y13, Y0, Y6
	VPMOVMSKB Y6, BX
	POPCNTL   BX, BX
	ADDQ      BX, CX
	ADDQ      $32, AX
	CMPQ      AX, DX
	JLE       loop

none:
	MOVQ AX, off+32(FP)
	MOVL $0, mask+40(FP)
	MOVQ CX, nl+48(FP)
	MOVL $0, nlMask+56(FP)
	VZEROUPPER
	RET

third:
	// A pair may start here: the byte after it must pass too (only
	// then is the step a hit; most steps have no pair and skip this).
	VMOVDQU 2(SI)(AX*1), Y6
	VPAND   Y12, Y6, Y7
	VPSRLW  $4, Y6, Y6
	VPAND   Y12, Y6, Y6
	VPSHUFB Y7, Y14, Y7
	VPSHUFB Y6, Y15, Y6
	VPAND   Y6, Y7, Y6
	VPAND   Y2, Y6, Y2
	VPTEST  Y2, Y2
	JZ      step

hit:
	VPXOR     Y7, Y7, Y7
	VPCMPEQB  Y7, Y2, Y2
	VPMOVMSKB Y2, BX
	NOTL      BX
	VPCMPEQB  Y13, Y0, Y6
	VPMOVMSKB Y6, DX
	MOVQ      AX, off+32(FP)
	MOVL      BX, mask+40(FP)
	MOVQ      CX, nl+48(FP)
	MOVL      DX, nlMask+56(FP)
	VZEROUPPER
	RET
