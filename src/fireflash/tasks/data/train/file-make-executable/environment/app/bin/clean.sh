#!/bin/bash
echo clean
