/* The lazy resolver every trampoline table entry starts at.
 *
 * A trampoline jumps through vgpu_table[i]; until the first call into the
 * driver that entry is vgpu_lazy_<i>, which loads i into %r11 and comes here.
 * We must not disturb the caller's arguments: rdi rsi rdx rcx r8 r9, rax (the
 * vector-register count of a varargs call), xmm0-7 and everything on the
 * stack. Save them, resolve the whole table once (pthread_once inside
 * vgpu_resolve_lazy), restore them and jump to the now-resolved entry as if
 * the caller had called it directly. %r10 is free (static chain, unused by C). */
	.section .note.GNU-stack,"",@progbits
	.text
	.globl vgpu_lazy_common
	.hidden vgpu_lazy_common
	.type vgpu_lazy_common,@function
vgpu_lazy_common:
	pushq %rbp
	movq %rsp, %rbp
	subq $192, %rsp
	andq $-16, %rsp
	movq %rdi, 0(%rsp)
	movq %rsi, 8(%rsp)
	movq %rdx, 16(%rsp)
	movq %rcx, 24(%rsp)
	movq %r8, 32(%rsp)
	movq %r9, 40(%rsp)
	movq %rax, 48(%rsp)
	movq %r11, 56(%rsp)
	movaps %xmm0, 64(%rsp)
	movaps %xmm1, 80(%rsp)
	movaps %xmm2, 96(%rsp)
	movaps %xmm3, 112(%rsp)
	movaps %xmm4, 128(%rsp)
	movaps %xmm5, 144(%rsp)
	movaps %xmm6, 160(%rsp)
	movaps %xmm7, 176(%rsp)
	call vgpu_resolve_lazy
	movq 0(%rsp), %rdi
	movq 8(%rsp), %rsi
	movq 16(%rsp), %rdx
	movq 24(%rsp), %rcx
	movq 32(%rsp), %r8
	movq 40(%rsp), %r9
	movq 48(%rsp), %rax
	movq 56(%rsp), %r11
	movaps 64(%rsp), %xmm0
	movaps 80(%rsp), %xmm1
	movaps 96(%rsp), %xmm2
	movaps 112(%rsp), %xmm3
	movaps 128(%rsp), %xmm4
	movaps 144(%rsp), %xmm5
	movaps 160(%rsp), %xmm6
	movaps 176(%rsp), %xmm7
	movq %rbp, %rsp
	popq %rbp
	leaq vgpu_table(%rip), %r10
	jmp *(%r10,%r11,8)
	.size vgpu_lazy_common,.-vgpu_lazy_common
