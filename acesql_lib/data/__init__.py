"""The data the method reads: schemas and their column sets, the benchmarks' loaders (`datasets`), downloads
(`downloads`) and checksums, the training pool's filtering, values indexes, routes (which columns a SQL reads),
a stage's tasks, the official release layouts and the tiny world the CPU profiles are built from.
"""
