// Command vm-node is vmop's node agent. This is a placeholder so that the
// image builds; the agent replaces it.
package main

func main() {}
