#pragma once
// Host memory allocator settings for the training process.

namespace mb {

// Note [Keeping freed host memory]
// LibTorch allocates every CPU tensor with malloc and frees it when the last reference goes.
// A training step allocates and frees the same large activations, gradients and batches each
// step. With glibc's defaults, blocks above the (adaptive, at most 32 MiB) mmap threshold get
// fresh mmaps, and free memory at the heap top beyond the trim threshold goes back to the
// kernel, so each step page-faults the same memory in again: on the tiny GPT, about 4,600
// faults per step and ~5% of the step time (perf), twice what the same model takes in Python.
// Like a caching device allocator, we keep freed host memory for reuse instead: blocks below
// 256 MiB come from the heap, and up to 1 GiB of free heap is kept. Resident data is either
// mapped from the page cache or above 256 MiB, so it is unaffected. A user's own
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ / GLIBC_TUNABLES settings win.
// What is kept is the steps' own: before a checkpoint is assembled and around an evaluation,
// work that allocates differently, the trainer hands the free heap back to the kernel
// (releaseFreedHostMemory), so that work's peak is its own within the memory budget, not
// added to the gigabyte the steps keep (gpt2-small at 256 tokens under a 4000 MiB budget: a
// peak RSS of 5.23 GiB without, see docs/operations.md "Evaluation batch").
void keepFreedHostMemory();
constexpr long long kKeptHostHeapBytes = 1LL << 30;  // the free heap kept at most

// Returns the free heap to the kernel (glibc's malloc_trim); a no-op elsewhere.
void releaseFreedHostMemory();

// While it lives, blocks of 1 MiB and more get their own mapping, handed back when freed, and
// the free heap is handed back at both ends: for work held to a memory budget that the steps'
// kept heap and its holes would otherwise push past (an evaluation batch counts the bytes it
// allocates, not the heap around them). Undone at its end, unless the user tuned malloc.
class ReturnFreedHostMemory {
 public:
  ReturnFreedHostMemory();
  ~ReturnFreedHostMemory();
  ReturnFreedHostMemory(const ReturnFreedHostMemory&) = delete;
  ReturnFreedHostMemory& operator=(const ReturnFreedHostMemory&) = delete;

 private:
  bool changed_ = false;
};

}  // namespace mb
