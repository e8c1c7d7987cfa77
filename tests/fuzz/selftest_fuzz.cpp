// libFuzzer target that crashes on purpose on an input starting with "CRASH": tests/wire/fuzz_test.cpp
// uses it to check that a crash fails the fuzz test and names the crashing input. Not run by make fuzz.
#include <cstdint>
#include <cstdlib>
#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size >= 5 && memcmp(data, "CRASH", 5) == 0) abort();
    return 0;
}
