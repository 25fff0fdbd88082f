"""LiteX boards: a CPU-less LiteX SoC around the core (:mod:`.soc`), the boards it builds for
(:mod:`.boards`), DDR3 initialisation without a CPU (:mod:`.dram_init`) and the open-toolchain
build (:mod:`.build`)."""
