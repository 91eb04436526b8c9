/*
 * attn_export.h — ATTN_API, the mark of every public declaration, and
 * ATTN_DEPRECATED, the mark of a former name: the
 * libraries are compiled with hidden visibility, so exactly the functions
 * that carry it are exported from libattn.so, libattn_viz.so, libattn_model.so and
 * libattn_mpi.so (tests/base/test_exports.sh checks both directions).
 */
#ifndef ATTN_EXPORT_H
#define ATTN_EXPORT_H

#if defined(_WIN32)
#  if defined(ATTN_BUILDING_SHARED)
#    define ATTN_API __declspec(dllexport)
#  elif defined(ATTN_USING_SHARED)
#    define ATTN_API __declspec(dllimport)
#  else
#    define ATTN_API
#  endif
#elif defined(__GNUC__)
#  define ATTN_API __attribute__((visibility("default")))
#else
#  define ATTN_API
#endif

/* ATTN_DEPRECATED("..."): the mark of a public name kept, until 1.0, for
 * programs written against an older header (the same function under its
 * former name, still exported, so that binaries built then still link);
 * compilers warn where a program calls it. */
#if defined(__GNUC__)
#  define ATTN_DEPRECATED(message) __attribute__((deprecated(message)))
#else
#  define ATTN_DEPRECATED(message)
#endif

#endif /* ATTN_EXPORT_H */
