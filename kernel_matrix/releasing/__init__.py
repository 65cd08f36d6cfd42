"""What leaves the machine: a release's contents (release), legacy wheels (wheels), the
kernel card (kernel_card; a kernel's own CARD.md: card_template, rendered by render_card in a
child process), publishing to the Hub (publish), verifying a published release
by rebuilding it (verify), and cleaning development artifacts (clean)."""
