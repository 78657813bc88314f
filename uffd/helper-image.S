/* SPDX-License-Identifier: MIT */
/* helper-image.S - the odpx-uffd program (main-helper.c), embedded: monitor.c starts it from a memfd. */
	.section .rodata
	.balign 64
	.globl odpx_helper_image
	.hidden odpx_helper_image
odpx_helper_image:
	.incbin HELPER_IMAGE
	.globl odpx_helper_image_end
	.hidden odpx_helper_image_end
odpx_helper_image_end:
	.section .note.GNU-stack,"",%progbits
