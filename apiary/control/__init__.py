"""The control plane: register-access messages, tile address maps and the control agent that
serves a tile's counters, registers and tables on the control NoC."""
