// moezip: the coordinator's test-only fault switches. MOEZIP_TEST_FAULT, read once, is a
// comma-separated list of:
//   corrupt_request   flip one byte of each request's first data frame after it was hashed (the
//                     worker must answer bad_hash)
//   corrupt_local_copy  flip one byte of the first expert of each layer's copy of this host's experts
//                     (experts.copy_local) after copying: the logits must change, so a test sees that
//                     the kernels read the copy
//   throw_in_region   the first region handled throws an exception inside the hook (it must be
//                     handled under the worker-error policy and leave later regions handled)
// Never set it in production: moezip then misbehaves on purpose.
#pragma once

namespace moezip {

/// True when `name` is in MOEZIP_TEST_FAULT's list.
bool test_fault(const char * name);

} // namespace moezip
