// emu.cpp: the fiber-based CUDA execution model emulator (see emu.h) and the
// zc_emu hooks that cuda/zc_port.h calls on the host.
#include "emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <random>
#include <vector>

#include "../../cuda/zc_port.h"

// Fiber switching: a 20-instruction switch on x86-64 (no system call);
// ucontext elsewhere (or with -DZC_EMU_UCONTEXT).
#if defined(__x86_64__) && !defined(ZC_EMU_UCONTEXT)
#define ZC_EMU_ASM_SWITCH 1
extern "C" void zc_emu_switch(void** save_sp, void* new_sp);
asm(R"(
.text
.globl zc_emu_switch
.hidden zc_emu_switch
.type zc_emu_switch, @function
zc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size zc_emu_switch, .-zc_emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");
#else
#define ZC_EMU_ASM_SWITCH 0
#endif

namespace zc_emu {

namespace {

enum State { RUNNABLE, WAIT_WARP, WAIT_BAR, DONE };
enum Op { OP_NONE, OP_BALLOT, OP_SHFL, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_SYNCWARP };

const char* op_name(int op) {
  static const char* names[] = {"none", "ballot", "shfl", "shfl_up", "shfl_down", "shfl_xor", "syncwarp"};
  return names[op];
}

struct Cta;

struct Fiber {
#if ZC_EMU_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  void* stack = nullptr;
  Cta* cta = nullptr;
  unsigned tid = 0;
  State state = RUNNABLE;
  int op = OP_NONE;
  uint32_t val = 0, arg = 0, res = 0;
};

struct Cta {
  unsigned bid = 0;
  unsigned char* smem = nullptr;
  std::vector<Fiber> th;
  unsigned done = 0;
  unsigned bar_arrived = 0;
  std::vector<unsigned> warp_arrived;
};

constexpr size_t kStack = 128 * 1024;

Config g_config;
Stats g_stats;
#if ZC_EMU_ASM_SWITCH
void* g_sched_sp = nullptr;
#else
ucontext_t g_sched;
#endif
std::vector<void*> g_stack_pool;
Fiber* g_cur = nullptr;
const std::function<void()>* g_body = nullptr;
unsigned g_grid = 0, g_block = 0;
uint64_t g_spins_this_launch = 0;

void to_scheduler(Fiber* f) {
#if ZC_EMU_ASM_SWITCH
  zc_emu_switch(&f->sp, g_sched_sp);
#else
  swapcontext(&f->ctx, &g_sched);
#endif
}

void to_fiber(Fiber* f) {
#if ZC_EMU_ASM_SWITCH
  zc_emu_switch(&g_sched_sp, f->sp);
#else
  swapcontext(&g_sched, &f->ctx);
#endif
}

void fiber_main();

extern "C" void zc_emu_fiber_entry() {
  fiber_main();
  violation("fiber returned");
}

void* get_stack() {
  if (!g_stack_pool.empty()) {
    void* p = g_stack_pool.back();
    g_stack_pool.pop_back();
    return p;
  }
  void* p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) violation("mmap of a fiber stack failed");
  mprotect(p, 4096, PROT_NONE);  // guard page: a stack overflow faults
  return p;
}

void init_fiber(Fiber& f) {
  f.stack = get_stack();
#if ZC_EMU_ASM_SWITCH
  uint64_t* sp = (uint64_t*)((uintptr_t)((uint8_t*)f.stack + kStack) & ~(uintptr_t)15);
  *--sp = 0;                                  // fake return address of the entry
  *--sp = (uint64_t)(uintptr_t)&zc_emu_fiber_entry;
  for (int k = 0; k < 6; k++) *--sp = 0;      // rbp rbx r12..r15
  *--sp = 0x037F00001F80ull;                  // fpu control word | mxcsr
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStack;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, (void (*)())zc_emu_fiber_entry, 0);
#endif
}

void on_fault(int sig) {
  char buf[200];
  int n = snprintf(buf, sizeof buf,
                   "cuda_emu: VIOLATION: memory fault (signal %d) in %s\n", sig,
                   g_cur ? "an emulated kernel thread" : "host code");
  if (n > 0) {
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
  }
  _exit(3);
}

void install_fault_handler() {
#if defined(ZC_EMU_NO_SIGNALS)
  return;  // inside a host process (Python) that owns its signal handlers
#endif
  static bool done = false;
  if (done) return;
  done = true;
  static char altstack[65536];
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  ss.ss_flags = 0;
  sigaltstack(&ss, nullptr);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fault;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

void fiber_main() {
  (*g_body)();
  Fiber* f = g_cur;
  Cta* c = f->cta;
  unsigned w = f->tid / 32;
  if (c->warp_arrived[w] != 0)
    violation("block %u thread %u exited while %u lanes of its warp wait in a warp intrinsic", c->bid, f->tid,
              c->warp_arrived[w]);
  if (c->bar_arrived != 0)
    violation("block %u thread %u exited while %u threads wait at __syncthreads", c->bid, f->tid, c->bar_arrived);
  f->state = DONE;
  c->done++;
  to_scheduler(f);
  violation("finished fiber resumed");
}

void yield() {
  Fiber* f = g_cur;
  g_stats.switches++;
  to_scheduler(f);
}

void complete_warp(Cta* c, unsigned w) {
  Fiber* lanes = &c->th[w * 32];
  const int op = lanes[0].op;
  for (int l = 1; l < 32; l++) {
    if (lanes[l].op != op)
      violation("block %u warp %u: diverged warp intrinsics: lane 0 in %s, lane %d in %s", c->bid, w, op_name(op), l,
                op_name(lanes[l].op));
    if ((op == OP_SHFL_UP || op == OP_SHFL_DOWN || op == OP_SHFL_XOR) && lanes[l].arg != lanes[0].arg)
      violation("block %u warp %u: %s with different distances (%u, %u)", c->bid, w, op_name(op), lanes[0].arg,
                lanes[l].arg);
  }
  const std::string& fault = g_config.fault;
  uint32_t res[32];
  switch (op) {
    case OP_BALLOT: {
      uint32_t m = 0;
      for (int l = 0; l < 32; l++) m |= (lanes[l].val != 0 ? 1u : 0u) << l;
      if (fault == "ballot") m ^= 1u << 3;
      for (int l = 0; l < 32; l++) res[l] = m;
      break;
    }
    case OP_SHFL:
      for (int l = 0; l < 32; l++) {
        unsigned src = lanes[l].arg & 31u;
        if (fault == "shfl") src = (src + 1) & 31u;
        res[l] = lanes[src].val;
      }
      break;
    case OP_SHFL_UP:
      for (int l = 0; l < 32; l++) {
        int d = (int)lanes[l].arg;
        if (fault == "shfl_up") d += 1;
        res[l] = l >= d ? lanes[l - d].val : lanes[l].val;
      }
      break;
    case OP_SHFL_DOWN:
      for (int l = 0; l < 32; l++) {
        int d = (int)lanes[l].arg;
        res[l] = l + d < 32 ? lanes[l + d].val : lanes[l].val;
      }
      break;
    case OP_SHFL_XOR:
      for (int l = 0; l < 32; l++) {
        unsigned p = (unsigned)l ^ (lanes[l].arg & 31u);
        if (fault == "shfl_xor") p ^= 1u;
        res[l] = lanes[p].val;
      }
      break;
    case OP_SYNCWARP:
      for (int l = 0; l < 32; l++) res[l] = 0;
      break;
    default:
      violation("bad warp op");
  }
  for (int l = 0; l < 32; l++) {
    lanes[l].res = res[l];
    lanes[l].op = OP_NONE;
    lanes[l].state = RUNNABLE;
  }
  c->warp_arrived[w] = 0;
  g_stats.warp_ops++;
}

uint32_t warp_op(int op, uint32_t v, uint32_t arg) {
  Fiber* f = g_cur;
  if (f == nullptr) violation("warp intrinsic called outside a kernel");
  Cta* c = f->cta;
  unsigned w = f->tid / 32;
  f->op = op;
  f->val = v;
  f->arg = arg;
  f->state = WAIT_WARP;
  if (++c->warp_arrived[w] == 32) {
    complete_warp(c, w);  // this lane goes on; the others are runnable again
  } else {
    yield();
  }
  return f->res;
}

}  // namespace

Config& config() { return g_config; }
Stats& stats() { return g_stats; }

void violation(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda_emu: VIOLATION: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  _exit(3);
}

unsigned tid() { return g_cur->tid; }
unsigned ntid() { return g_block; }
unsigned bid() { return g_cur->cta->bid; }
unsigned nbid() { return g_grid; }
unsigned char* smem() { return g_cur->cta->smem; }

uint32_t ballot(bool p) { return warp_op(OP_BALLOT, p ? 1u : 0u, 0); }
uint32_t shfl(uint32_t v, int src) { return warp_op(OP_SHFL, v, (uint32_t)src); }
uint32_t shfl_up(uint32_t v, unsigned d) { return warp_op(OP_SHFL_UP, v, d); }
uint32_t shfl_down(uint32_t v, unsigned d) { return warp_op(OP_SHFL_DOWN, v, d); }
uint32_t shfl_xor(uint32_t v, unsigned m) { return warp_op(OP_SHFL_XOR, v, m); }
void syncwarp() { warp_op(OP_SYNCWARP, 0, 0); }

void syncthreads() {
  if (g_config.fault == "nosync") return;
  Fiber* f = g_cur;
  Cta* c = f->cta;
  if (c->done != 0) violation("block %u: __syncthreads after %u threads exited", c->bid, c->done);
  for (unsigned w = 0; w < g_block / 32; w++)
    if (c->warp_arrived[w] != 0 && w == f->tid / 32)
      violation("block %u thread %u: __syncthreads while lanes of its warp wait in a warp intrinsic", c->bid, f->tid);
  f->state = WAIT_BAR;
  if (++c->bar_arrived == g_block) {
    for (Fiber& t : c->th) t.state = RUNNABLE;
    c->bar_arrived = 0;
    g_stats.barriers++;
  } else {
    yield();
  }
}

void spin_pause() {
  g_stats.spins++;
  if (++g_spins_this_launch > 4000000) violation("live-lock: a spin-wait never ended");
  yield();
}

void check_vector_access(const void* p, unsigned bytes) {
  if (((uintptr_t)p % bytes) != 0) {
    if (g_cur != nullptr)
      violation("block %u thread %u: misaligned %u-byte vector access at %p", g_cur->cta->bid, g_cur->tid, bytes, p);
    violation("misaligned %u-byte vector access at %p", bytes, p);
  }
}

void launch(unsigned grid, unsigned block, size_t smem_bytes, const std::function<void()>& body) {
  if (block == 0 || block % 32 != 0 || block > 1024) violation("block size %u is not a multiple of 32 in 32..1024", block);
  if (g_cur != nullptr) violation("nested launch");
  install_fault_handler();
  g_stats.launches++;
  g_body = &body;
  g_grid = grid;
  g_block = block;
  g_spins_this_launch = 0;
  std::vector<unsigned> order(grid);
  for (unsigned b = 0; b < grid; b++) order[b] = b;
  std::mt19937_64 rng(g_config.seed * 0x9E3779B97F4A7C15ull + grid);
  if (g_config.order == 1) std::reverse(order.begin(), order.end());
  if (g_config.order == 2) std::shuffle(order.begin(), order.end(), rng);
  std::deque<unsigned> pending(order.begin(), order.end());
  std::vector<Cta*> active;
  const unsigned resident = (unsigned)std::max(1, g_config.resident);
  std::vector<Fiber*> runnable;
  while (!pending.empty() || !active.empty()) {
    while (active.size() < resident && !pending.empty()) {
      Cta* c = new Cta;
      c->bid = pending.front();
      pending.pop_front();
      size_t sz = (smem_bytes + 63) / 64 * 64 + 64;
      c->smem = (unsigned char*)aligned_alloc(64, sz);
      memset(c->smem, 0xA5, sz);
      c->th.resize(block);
      c->warp_arrived.assign(block / 32, 0);
      for (unsigned t = 0; t < block; t++) {
        Fiber& f = c->th[t];
        f.cta = c;
        f.tid = t;
        init_fiber(f);
      }
      active.push_back(c);
      g_stats.blocks++;
    }
    runnable.clear();
    for (Cta* c : active)
      for (Fiber& f : c->th)
        if (f.state == RUNNABLE) runnable.push_back(&f);
    if (runnable.empty()) {
      for (Cta* c : active) {
        if (c->done == block) continue;
        fprintf(stderr, "cuda_emu: block %u: %u done, %u at __syncthreads; warps waiting in intrinsics:", c->bid,
                c->done, c->bar_arrived);
        for (unsigned w = 0; w < block / 32; w++)
          if (c->warp_arrived[w]) fprintf(stderr, " w%u(%u lanes)", w, c->warp_arrived[w]);
        fprintf(stderr, "\n");
      }
      bool all_done = true;
      for (Cta* c : active) all_done = all_done && c->done == block;
      if (!all_done) violation("deadlock: no thread can run");
    }
    if (g_config.order == 1) std::reverse(runnable.begin(), runnable.end());
    if (g_config.order == 2) std::shuffle(runnable.begin(), runnable.end(), rng);
    for (Fiber* f : runnable) {
      if (f->state != RUNNABLE) continue;
      g_cur = f;
      to_fiber(f);
      g_cur = nullptr;
    }
    for (size_t i = 0; i < active.size();) {
      Cta* c = active[i];
      if (c->done == block) {
        for (Fiber& f : c->th) g_stack_pool.push_back(f.stack);
        free(c->smem);
        delete c;
        active.erase(active.begin() + (long)i);
      } else {
        i++;
      }
    }
  }
  g_body = nullptr;
}

}  // namespace zc_emu
