"""What leaves the machine: a release's contents (release), legacy wheels (wheels), the
kernel card (kernel_card), publishing to the Hub (publish), verifying a published release
by rebuilding it (verify), and cleaning development artifacts (clean)."""
