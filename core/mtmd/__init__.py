"""Image and audio turns (`dasllama mtmd`): an mmproj's vision or audio tower turns an image or
a clip into embeddings that are spliced into the chat prompt in place of its media marker, as
llama.cpp's libmtmd does."""
