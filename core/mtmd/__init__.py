"""Image turns (`dasllama mtmd`): an mmproj's vision tower turns an image into embeddings that
are spliced into the chat prompt in place of its media marker, as llama.cpp's libmtmd does."""
