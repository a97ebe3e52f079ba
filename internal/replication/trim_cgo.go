//go:build linux && cgo

package replication

/*
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
static void neptune_trim(void) {
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}
static void neptune_tune(void) {
#ifdef __GLIBC__
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024);
	mallopt(M_ARENA_MAX, 2);
#endif
}
*/
import "C"

// trimCHeap returns the C heap's free memory to the OS. Pebble allocates
// its memtables with C's malloc (the write log's and kv's stores), and
// glibc keeps the chunks a burst freed (its mmap threshold rises to the
// largest block freed, so later memtables come from heaps it trims only at
// their top): in `neptune bench burst` 100–150 MiB of a node's RSS after
// the burst lay outside the Go heap until this was called.
func trimCHeap() { C.neptune_trim() }

// tuneCHeap makes glibc return large freed blocks at once: blocks of
// 128 KiB and more (a memtable) are mmap'd and unmapped when freed,
// instead of glibc raising that threshold to the largest block freed so
// far and keeping later ones in its heaps; a heap's free top is returned
// past 128 KiB; and cgo calls from many threads share two arenas instead
// of up to eight per core. (The same as the MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_ and MALLOC_ARENA_MAX environment variables, with
// which the burst bench's nodes settled at 132–148 MiB instead of
// 229–281.) Called once, when the first replication runtime starts.
func tuneCHeap() { C.neptune_tune() }
