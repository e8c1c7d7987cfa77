#include "tools/moezip-fixture/fixture_vocab.h"

#include "llama.h"

#include <cstdio>
#include <set>

namespace moezip {

namespace {

// "▁" (U+2581), SentencePiece's word-boundary mark: llama.cpp's SPM tokenizer turns spaces into it
// and prepends it to the text (add_space_prefix defaults to true for "llama").
const char * const k_space = "\xE2\x96\x81";
const size_t       k_space_len = 3; // bytes of k_space

// Common English words (and a few from the prompts the project's tests and demos use).
const char * const k_words[] = {
    "the", "of", "and", "to", "in", "is", "was", "that", "for", "it", "with", "as", "on", "he",
    "she", "they", "be", "at", "by", "this", "had", "not", "are", "but", "from", "or", "have",
    "an", "which", "one", "you", "were", "her", "all", "their", "there", "been", "if", "more",
    "when", "will", "would", "who", "so", "no", "out", "up", "into", "do", "any", "your", "what",
    "has", "can", "some", "time", "could", "them", "see", "other", "than", "then", "now", "look",
    "only", "come", "its", "over", "think", "also", "back", "after", "use", "two", "how", "our",
    "work", "first", "well", "way", "even", "new", "want", "because", "these", "give", "day",
    "most", "us", "said", "very", "little", "big", "small", "good", "bad", "happy", "sad",
    "girl", "boy", "man", "woman", "mom", "dad", "friend", "friends", "cat", "dog", "bird", "fish",
    "tree", "house", "home", "park", "sun", "sky", "water", "ball", "toy", "car", "book", "story",
    "once", "upon", "named", "lived", "loved", "liked", "played", "went", "saw", "found", "wanted",
    "asked", "looked", "smiled", "felt", "made", "took", "ran", "jumped", "together", "every",
    "always", "never", "again", "too", "my", "me", "we", "his", "him", "i", "a", "hello",
    "world", "model", "expert", "experts", "token", "tokens", "layer", "machine", "network",
    "computer", "data", "fast", "slow", "red", "blue", "green", "yellow", "white", "black", "old",
    "young", "long", "short", "high", "low", "right", "left", "people", "year", "years", "thing",
    "things", "place", "where", "why", "here", "just", "know", "like", "make", "get", "go", "say",
    "help", "tell", "call", "try", "ask", "need", "feel", "become", "leave", "put", "mean", "keep",
    "let", "begin", "seem", "show", "hear", "play", "run", "move", "live", "believe", "bring",
    "happen", "write", "sit", "stand", "lose", "pay", "meet", "include", "learn", "change", "lead",
    "understand", "watch", "follow", "stop", "create", "speak", "read", "spend", "grow", "open",
    "walk", "win", "teach", "offer", "remember", "consider", "appear", "buy", "serve", "die",
    "send", "build", "stay", "fall", "cut", "reach", "kill", "raise", "pass", "sell", "decide",
    "return", "explain", "hope", "develop", "carry", "break", "receive", "agree", "support",
    "hit", "produce", "eat", "cover", "catch", "draw", "choose", "quick", "brown", "fox", "lazy",
};

const char * const k_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-:;()";

void add(fixture_vocab & v, std::set<std::string> & seen, const std::string & text, int32_t type) {
    if (!seen.insert(text).second) return;
    v.scores.push_back(-(float) v.tokens.size());
    v.tokens.push_back(text);
    v.types.push_back(type);
}

fixture_vocab build_base() {
    fixture_vocab v;
    std::set<std::string> seen;
    add(v, seen, "<unk>", LLAMA_TOKEN_TYPE_UNKNOWN);
    add(v, seen, "<s>", LLAMA_TOKEN_TYPE_CONTROL);
    add(v, seen, "</s>", LLAMA_TOKEN_TYPE_CONTROL);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        add(v, seen, buf, LLAMA_TOKEN_TYPE_BYTE);
    }
    add(v, seen, k_space, LLAMA_TOKEN_TYPE_NORMAL);
    for (const char * c = k_chars; *c; ++c) add(v, seen, std::string(1, *c), LLAMA_TOKEN_TYPE_NORMAL);
    for (const char * w : k_words) {
        const std::string word = std::string(k_space) + w;
        for (size_t len = k_space_len + 1; len <= word.size(); ++len) add(v, seen, word.substr(0, len), LLAMA_TOKEN_TYPE_NORMAL);
    }
    return v;
}

} // namespace

int64_t fixture_vocab_base_size() {
    static const int64_t n = (int64_t) build_base().tokens.size();
    return n;
}

fixture_vocab fixture_vocab_build(int64_t n_vocab) {
    fixture_vocab v = build_base();
    for (int64_t i = (int64_t) v.tokens.size(); i < n_vocab; ++i) {
        v.scores.push_back(-(float) i);
        v.tokens.push_back("<extra_" + std::to_string(i) + ">");
        v.types.push_back(LLAMA_TOKEN_TYPE_NORMAL);
    }
    return v;
}

} // namespace moezip
