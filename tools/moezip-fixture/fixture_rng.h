// moezip-fixture: the deterministic random numbers behind every fixture weight.
//
// splitmix64 (Steele, Lea, Flood 2014; constants as in Vigna's reference splitmix64.c) is a
// counter-based generator: fully specified integer arithmetic, so the same seed gives the same
// stream on every compiler and libc (std::normal_distribution is implementation-defined).
// Floats are made from the top 24 bits with exact operations only (no libm), so a value is the
// same float everywhere.
#pragma once

#include <cstdint>
#include <string>

namespace moezip {

/// One step of splitmix64: advances `state` and returns the next 64-bit output.
inline uint64_t splitmix64_next(uint64_t & state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// A stream of uniform floats in [-1, 1), one per call.
class fixture_rng {
public:
    /// Independent stream for one tensor: mixes the seed with the FNV-1a hash of the tensor name,
    /// so adding or reordering tensors never changes another tensor's values.
    fixture_rng(uint64_t seed, const std::string & name) {
        uint64_t h = 0xCBF29CE484222325ull; // FNV-1a 64 offset basis
        for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
        state_ = seed;
        splitmix64_next(state_);
        state_ ^= h;
    }

    /// Uniform in [-1, 1): k / 2^23 - 1 for a 24-bit k, exact in float.
    float next_symmetric() {
        const uint64_t k = splitmix64_next(state_) >> 40;             // 24 bits
        return (float) (int64_t) k * (1.0f / 8388608.0f) - 1.0f;      // 2^23
    }

private:
    uint64_t state_;
};

} // namespace moezip
