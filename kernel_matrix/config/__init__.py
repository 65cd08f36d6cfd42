"""The configuration files and their schemas: build_matrix.yaml (matrix_schema) and
build.toml (buildtoml), read within size and depth limits (configfile), every value kept
with the file:line:col it came from (yamlsource, sourcelines, section), and who asked for
this run (github_event: trusted or not). Nothing here runs a compiler or a container."""
