#!/bin/bash
sed -i 's/^def main()$/def main():/' /app/hello.py
