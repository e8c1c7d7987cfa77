// moezip: how much of a range of this process's memory is mapped to a page in RAM now.
//
// For weights mapped from the model file, the page cache may hold the file (mincore says so for
// every process), but only pages this process touched are in its page tables and count in its
// resident set. /proc/self/pagemap has one 64-bit entry per virtual page; bit 63 is "present in
// RAM" (Documentation/admin-guide/mm/pagemap.rst), readable for one's own process without privilege.
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace moezip {

/// Of the whole pages inside [begin, end) address ranges (any order and alignment; touching or
/// overlapping ranges are merged first, then rounded in: a page shared with memory outside every
/// range is not counted), `pages` gets their bytes and `present` the bytes of those present in this
/// process's page tables. Errors: io_error when /proc/self/pagemap cannot be read. Reads 8 bytes
/// per page (2 MiB of pagemap per GiB).
Status pages_present_bytes(std::vector<std::pair<uintptr_t, uintptr_t>> ranges, uint64_t & pages, uint64_t & present);

/// True when every page touching [p, p + n) is present in this process's page tables (a read there
/// faults nothing in); false when one is not or /proc/self/pagemap cannot be read. Thread-safe; the
/// pagemap is opened once per process (again after a fork).
bool pages_touching_present(const void * p, size_t n);

} // namespace moezip
