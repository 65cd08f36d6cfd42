"""Building matrix cells in builder containers: the engine (engine), builder images
(images), the typed request a container gets (build_request), one cell's build and the
pool of them (container_build), and reading back what a container wrote, never following
links out of it (container_output)."""
