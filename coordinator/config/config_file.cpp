// moezip: reading the config file from disk (size limit, errors naming the path); the text goes to
// config_load_string (config.cpp).
#include "coordinator/config/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace moezip {

namespace {

constexpr long config_file_max_bytes = 1 << 20;

} // namespace

Status config_load_file(const std::string & path, Config & out) {
    try {
        struct stat st;
        if (stat(path.c_str(), &st) != 0) {
            out = Config();
            return Status::io_error("cannot read config " + path + ": " + strerror(errno));
        }
        if (!S_ISREG(st.st_mode) || st.st_size > config_file_max_bytes) {
            out = Config();
            return Status::io_error("cannot read config " + path + ": " +
                                    (S_ISREG(st.st_mode) ? "larger than 1 MiB" : "not a regular file"));
        }
        FILE * f = fopen(path.c_str(), "rb");
        if (!f) {
            out = Config();
            return Status::io_error("cannot read config " + path + ": " + strerror(errno));
        }
        std::string text((size_t) st.st_size, '\0');
        size_t got = fread(&text[0], 1, text.size(), f);
        bool bad = ferror(f) != 0;
        fclose(f);
        if (bad) {
            out = Config();
            return Status::io_error("cannot read config " + path + ": read error");
        }
        text.resize(got);
        return config_load_string(text, path, out);
    } catch (const std::exception & e) {
        out = Config();
        return Status::io_error("cannot read config " + path + ": " + e.what());
    }
}

} // namespace moezip
